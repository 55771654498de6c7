# The ABI (stepwatch.h, "Structs that grow"): abi_v1_caller is a program built against the
# first release's structs (tests/abi/stepwatch_v1.h, frozen) and linked with today's shared
# library; abi_layout checks the layouts at compile time and the copy rules at run time.
if(NOT SW_TSAN_ONLY_MT)
add_executable(abi_v1_caller ${CMAKE_CURRENT_SOURCE_DIR}/abi/abi_v1_caller.c)
target_compile_definitions(abi_v1_caller PRIVATE _GNU_SOURCE)
target_link_libraries(abi_v1_caller PRIVATE stepwatch PkgConfig::CMOCKA)
add_test(NAME abi_v1_caller COMMAND abi_v1_caller)

add_executable(abi_layout ${CMAKE_CURRENT_SOURCE_DIR}/abi/abi_layout.c)
target_include_directories(abi_layout PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(abi_layout PRIVATE _GNU_SOURCE)
target_link_libraries(abi_layout PRIVATE stepwatch_static PkgConfig::CMOCKA)
add_test(NAME abi_layout COMMAND abi_layout)
endif()
