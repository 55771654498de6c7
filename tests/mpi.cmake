# The MPI path of the cross-rank aggregation (issue 22): tests/mpi/mpi_train.c under a real
# mpirun with 2, 3, 4 and 8 ranks (--oversubscribe: more ranks than cores), registered only where
# CMake found MPI and an mpirun, and not under the sanitizers (MPI's own allocations read as
# leaks there).
if(TARGET stepwatch_mpi AND MPIEXEC_EXECUTABLE AND NOT SW_SANITIZE)
  find_package(Python3 COMPONENTS Interpreter)
  add_executable(mpi_train ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mpi_train.c)
  target_link_libraries(mpi_train PRIVATE stepwatch_mpi)
  if(Python3_FOUND)
    set(check ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/check_mpi.py
        ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_train>)
    add_test(NAME mpi_ranks_2_data COMMAND ${check} 2 --data 1)
    add_test(NAME mpi_ranks_3_compute COMMAND ${check} 3 --compute 2)
    add_test(NAME mpi_ranks_4_data_and_compute COMMAND ${check} 4 --data 1 --compute 3)
    add_test(NAME mpi_ranks_killed COMMAND ${check} 3 --data 1 --kill 2)
    # 8 ranks: the final round's binomial tree three levels deep; a dead leaf (5) under rank 4,
    # which waits its level's share of the timeout and still reaches rank 0 in time; a dead
    # inner rank (4): its children 5 and 6 (with 7's payload) get no word from it and go
    # straight to rank 0, so only rank 4 is missing
    add_test(NAME mpi_ranks_8_tree COMMAND ${check} 8 --data 3 --compute 6)
    add_test(NAME mpi_ranks_8_killed_leaf COMMAND ${check} 8 --data 1 --kill 5)
    add_test(NAME mpi_ranks_8_killed_inner COMMAND ${check} 8 --data 1 --kill 4)
    set_tests_properties(mpi_ranks_2_data mpi_ranks_3_compute mpi_ranks_4_data_and_compute
      mpi_ranks_killed mpi_ranks_8_tree mpi_ranks_8_killed_leaf mpi_ranks_8_killed_inner
      PROPERTIES TIMEOUT 300 RESOURCE_LOCK mpi)
  endif()
endif()
