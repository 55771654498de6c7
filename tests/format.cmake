# The C formatting check (scripts/format.sh --check against .clang-format): on by default, so
# make test fails on a C file not in the one layout (scripts/format.sh reformats); skipped,
# not failed, where clang-format is not installed (cmake -DSW_FORMAT_CHECK=OFF turns it off).
if(SW_FORMAT_CHECK)
  add_test(NAME format_check COMMAND ${PROJECT_SOURCE_DIR}/scripts/format.sh --check)
  set_tests_properties(format_check PROPERTIES SKIP_RETURN_CODE 77)
endif()
