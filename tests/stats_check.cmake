# Statistics checked against Python's statistics module on the same samples.
add_executable(stats_dump ${CMAKE_CURRENT_SOURCE_DIR}/tools/stats_dump.c)
target_link_libraries(stats_dump PRIVATE stepwatch_static)
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME stats_vs_python
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_stats.py
          $<TARGET_FILE:stats_dump> ${CMAKE_CURRENT_BINARY_DIR})
