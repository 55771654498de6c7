# The -finstrument-functions library: its test and the example MLP it profiles are compiled
# with -finstrument-functions (the library and stepwatch itself are not), and linked with
# -rdynamic so dladdr names the program's functions. It records from several threads, so the
# ThreadSanitizer build runs it too.
if(TARGET stepwatch_instrument)
  add_executable(test_instrument
    ${CMAKE_CURRENT_SOURCE_DIR}/instrument/test_instrument.c
    ${PROJECT_SOURCE_DIR}/examples/mlp.c
    ${PROJECT_SOURCE_DIR}/examples/idx.c
    ${PROJECT_SOURCE_DIR}/examples/dataset.c
    ${PROJECT_SOURCE_DIR}/examples/trainer.c)
  target_include_directories(test_instrument PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/c
    ${PROJECT_SOURCE_DIR}/examples)
  target_compile_definitions(test_instrument PRIVATE _GNU_SOURCE)
  target_compile_options(test_instrument PRIVATE -finstrument-functions)
  target_link_options(test_instrument PRIVATE -rdynamic)
  target_link_libraries(test_instrument PRIVATE stepwatch_instrument PkgConfig::CMOCKA m)
  add_test(NAME test_instrument COMMAND test_instrument)
  set_tests_properties(test_instrument PROPERTIES TIMEOUT 300)
endif()
