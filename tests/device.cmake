# The device layer's tests run without a GPU: fake NVML and CUDA runtime libraries (what
# STEPWATCH_NVML and STEPWATCH_CUDART point stepwatch at) stand in for the driver's.
add_library(fake_cudart MODULE ${CMAKE_CURRENT_SOURCE_DIR}/device/fake_cudart.c)
add_library(fake_nvml MODULE ${CMAKE_CURRENT_SOURCE_DIR}/device/fake_nvml.c)
add_library(fake_nvml_incomplete MODULE ${CMAKE_CURRENT_SOURCE_DIR}/device/fake_nvml.c)
target_compile_definitions(fake_nvml_incomplete PRIVATE FAKE_NVML_INCOMPLETE)
target_link_libraries(fake_cudart PRIVATE Threads::Threads)
foreach(t test_device test_device_time test_device_intervals test_device_comm test_slow_os)
  if(TARGET ${t})
    add_dependencies(${t} fake_cudart fake_nvml fake_nvml_incomplete)
    target_compile_definitions(${t} PRIVATE
      SW_FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
      SW_FAKE_NVML="$<TARGET_FILE:fake_nvml>"
      SW_FAKE_NVML_INCOMPLETE="$<TARGET_FILE:fake_nvml_incomplete>")
    target_link_libraries(${t} PRIVATE ${CMAKE_DL_LIBS})
  endif()
endforeach()
