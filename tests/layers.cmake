# The layer check (issue 26): tests/tools/layers.py derives the call graph between files from
# the objects this build made (nm) and the include graph from the sources, and checks both
# against src/layers.txt: no circle, no edge the layer order does not allow. layers_self_test
# shows it catching an upward call, an upward include and circles in made-up trees.
# Every C file of a layer must have an object here, so the check sees all the C (issue 38:
# the extension's objects are compiled even where it is not built, python/CMakeLists.txt);
# --unbuilt names the folders this configuration leaves out, and says so in the output.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(SW_LAYERS ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/layers.py)
  set(SW_UNBUILT)
  if(NOT SW_BUILD_PYTHON AND NOT Python_Development.Module_FOUND)
    list(APPEND SW_UNBUILT --unbuilt python/_stepwatch/)
  endif()
  if(NOT SW_BUILD_CLI)
    list(APPEND SW_UNBUILT --unbuilt cli/)
  endif()
  if(SW_BUILD_PYTHON OR NOT SW_BUILD_INSTRUMENT)
    list(APPEND SW_UNBUILT --unbuilt src/instrument/)
  endif()
  if(NOT MPI_C_FOUND)
    list(APPEND SW_UNBUILT --unbuilt src/mpi/)
  endif()
  add_test(NAME layers COMMAND ${SW_LAYERS} ${SW_UNBUILT} ${PROJECT_SOURCE_DIR}
                               ${PROJECT_BINARY_DIR})
  add_test(NAME layers_self_test COMMAND ${SW_LAYERS} --self-test)
  set_tests_properties(layers layers_self_test PROPERTIES
    ENVIRONMENT "NM=${CMAKE_NM};CC=${CMAKE_C_COMPILER}")
endif()
