# The installed library, its pkg-config file and its CMake package work for a user's program.
if(NOT SW_TSAN_ONLY_MT AND NOT SW_SANITIZE)
  add_test(NAME install_pkgconfig_and_cmake
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install/check_install.sh
            ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install_check)
endif()
