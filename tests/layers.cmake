# The layer check (issue 26): tests/tools/layers.py derives the call graph between files from
# the objects this build made (nm) and the include graph from the sources, and checks both
# against src/layers.txt: no circle, no edge the layer order does not allow. layers_self_test
# shows it catching an upward call, an upward include and circles in made-up trees.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(SW_LAYERS ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/layers.py)
  add_test(NAME layers COMMAND ${SW_LAYERS} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  add_test(NAME layers_self_test COMMAND ${SW_LAYERS} --self-test)
  set_tests_properties(layers layers_self_test PROPERTIES
    ENVIRONMENT "NM=${CMAKE_NM};CC=${CMAKE_C_COMPILER}")
endif()
