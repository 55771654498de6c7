# Tests of the C engine's example code (MLP, IDX reader, data loader) compile the example
# sources in directly, so they run whether or not the examples are built.
set(SW_EXAMPLE_ML_SOURCES
  ${PROJECT_SOURCE_DIR}/examples/mlp.c
  ${PROJECT_SOURCE_DIR}/examples/idx.c
  ${PROJECT_SOURCE_DIR}/examples/dataset.c
  ${PROJECT_SOURCE_DIR}/examples/trainer.c)
foreach(t test_mlp test_idx test_engine_delay)
  if(TARGET ${t})
    target_sources(${t} PRIVATE ${SW_EXAMPLE_ML_SOURCES})
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/examples)
    target_link_libraries(${t} PRIVATE m)
  endif()
endforeach()
