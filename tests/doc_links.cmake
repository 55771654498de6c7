# The docs' links (issue 38): every relative link in README.md, python/README.md and docs/*.md
# names a file that exists and, with #anchor, a heading of that page. doc_links_self_test
# shows the check catching a missing file, a missing anchor and skipping links in code.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(SW_DOC_LINKS ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/doc_links.py)
  add_test(NAME doc_links COMMAND ${SW_DOC_LINKS} ${PROJECT_SOURCE_DIR})
  add_test(NAME doc_links_self_test COMMAND ${SW_DOC_LINKS} --self-test)
endif()
