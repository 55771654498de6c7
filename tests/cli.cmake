# The stepwatch command's tests (issue 5). test_run_cli (a cmocka program, registered by
# tests/CMakeLists.txt) runs the command on deterministic run files and leaves them in
# tests/cli_fixture/; the checks below read what it left.
if(TARGET test_run_cli)
  set_tests_properties(test_run_cli PROPERTIES FIXTURES_SETUP sw_cli_files)
  if(TARGET stepwatch_cli)
    add_dependencies(test_run_cli stepwatch_cli)
  endif()
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND)
    add_test(NAME cli_chrome_trace_parses
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_chrome_trace.py
              ${PROJECT_BINARY_DIR}/tests/cli_fixture/trace.json 2)
    set_tests_properties(cli_chrome_trace_parses PROPERTIES FIXTURES_REQUIRED sw_cli_files)
  endif()
endif()
