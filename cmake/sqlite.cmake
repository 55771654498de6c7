# cmake/sqlite.cmake — where SQLite comes from; sets SW_SQLITE_TARGET.
#   SW_SQLITE=shared  (default) the system's libsqlite3 (Debian: libsqlite3-dev)
#   SW_SQLITE=static  linked in: SQLite's amalgamation when third_party/sqlite/sqlite3.c is
#                     there (an sdist carries it: scripts/sqlite-amalgamation.sh), else the
#                     system's static libsqlite3.a. The wheel uses this: it then needs no
#                     system SQLite at run time.
# Returns with SW_SQLITE_MISSING set (and no target) when nothing usable is found, so the
# caller can name everything missing in one message.
set(SW_SQLITE "shared" CACHE STRING "SQLite: shared (the system's) or static (linked in)")
set_property(CACHE SW_SQLITE PROPERTY STRINGS shared static)
set(SW_SQLITE_MISSING "")
set(SW_SQLITE_BUNDLED_DIR ${PROJECT_SOURCE_DIR}/third_party/sqlite)
if(SW_SQLITE STREQUAL "static" AND NOT SW_BUILD_PYTHON)
  message(FATAL_ERROR "SW_SQLITE=static is for the Python build (pip install .); the C "
          "library and its CMake package use the system's shared SQLite")
endif()

if(SW_SQLITE STREQUAL "static" AND EXISTS ${SW_SQLITE_BUNDLED_DIR}/sqlite3.c)
  # The amalgamation, built like Debian builds its library, without the loadable-extension
  # and Tcl parts stepwatch does not use.
  add_library(sw_sqlite3 STATIC ${SW_SQLITE_BUNDLED_DIR}/sqlite3.c)
  target_include_directories(sw_sqlite3 SYSTEM PUBLIC ${SW_SQLITE_BUNDLED_DIR})
  target_compile_definitions(sw_sqlite3 PRIVATE SQLITE_THREADSAFE=1 SQLITE_OMIT_LOAD_EXTENSION
                             SQLITE_DQS=0)
  target_compile_options(sw_sqlite3 PRIVATE -w -fvisibility=hidden)
  target_link_libraries(sw_sqlite3 PUBLIC Threads::Threads m ${CMAKE_DL_LIBS})
  set(SW_SQLITE_TARGET sw_sqlite3)
  message(STATUS "SQLite: the amalgamation in ${SW_SQLITE_BUNDLED_DIR}, linked in")
elseif(SW_SQLITE STREQUAL "static")
  find_path(SW_SQLITE_INCLUDE_DIR sqlite3.h)
  find_library(SW_SQLITE_STATIC_LIBRARY NAMES libsqlite3.a)
  if(SW_SQLITE_INCLUDE_DIR AND SW_SQLITE_STATIC_LIBRARY)
    add_library(sw_sqlite3 STATIC IMPORTED)
    set_target_properties(sw_sqlite3 PROPERTIES IMPORTED_LOCATION ${SW_SQLITE_STATIC_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${SW_SQLITE_INCLUDE_DIR})
    target_link_libraries(sw_sqlite3 INTERFACE Threads::Threads m ${CMAKE_DL_LIBS})
    set(SW_SQLITE_TARGET sw_sqlite3)
    message(STATUS "SQLite: ${SW_SQLITE_STATIC_LIBRARY}, linked in")
  else()
    set(SW_SQLITE_MISSING "SQLite's header and static library (Debian: libsqlite3-dev)")
  endif()
else()
  find_package(SQLite3)
  # CMake 4 renamed the imported target; Debian's CMake 3.25 has only the old name.
  if(TARGET SQLite3::SQLite3)
    set(SW_SQLITE_TARGET SQLite3::SQLite3)
  elseif(TARGET SQLite::SQLite3)
    set(SW_SQLITE_TARGET SQLite::SQLite3)
  else()
    set(SW_SQLITE_MISSING "SQLite's header and library (Debian: libsqlite3-dev)")
  endif()
endif()
