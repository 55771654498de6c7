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

# The example end to end: a short run writes its JSON report and both Ignite CSVs; a missing MNIST
# directory is a clear error (exit status 3).
if(TARGET train_mlp)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/example_train_mlp)
  add_test(NAME example_train_mlp
    COMMAND sh -c "rm -rf '${out}' && mkdir -p '${out}' && \
'$<TARGET_FILE:train_mlp>' --epochs 2 --train 640 --valid 128 --json '${out}/r.json' \
--csv '${out}/i.csv' --handlers-csv '${out}/h.csv' > '${out}/stdout.txt' && \
grep -q '\"schema\": \"stepwatch.report\"' '${out}/r.json' && \
test $(wc -l < '${out}/i.csv') -eq 21 && test $(wc -l < '${out}/h.csv') -eq 21 && \
grep -q '^#,processing_stats,dataflow_stats,log_epoch (EPOCH_COMPLETED),' '${out}/h.csv' && \
grep -q 'Time profiling stats' '${out}/stdout.txt' && \
grep -q 'avg train downtime' '${out}/stdout.txt'")
  add_test(NAME example_train_mlp_bad_mnist
    COMMAND sh -c "'$<TARGET_FILE:train_mlp>' --mnist /nonexistent-mnist-dir 2> '${out}.err'; \
test $? -eq 3 && grep -q 'cannot open' '${out}.err'")
endif()

# The known-delay test measures sleeps against the clock: run it alone, not beside other tests.
if(TARGET test_engine_delay)
  set_tests_properties(test_engine_delay PROPERTIES RUN_SERIAL TRUE)
endif()
