# The public header compiles under a user's strict flags, as C and as C++.
add_test(NAME header_strict_c_and_cxx
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/header/check_header.sh ${PROJECT_SOURCE_DIR}
          ${CMAKE_CURRENT_BINARY_DIR}/header_check)
