# Run at install time (install(SCRIPT) in CMakeLists.txt): writes stepwatch.pc for the prefix
# actually installed into, which `cmake --install --prefix` may change after configuring.
# In: SW_PC_IN, SW_PC_OUT, SW_LIBDIR, SW_INCLUDEDIR (GNUInstallDirs, relative or absolute),
# PROJECT_VERSION. A relative dir is written as ${prefix}/dir, so pkg-config's
# --define-prefix can still relocate the file.
set(SW_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${SW_${kind}}")
    set(SW_PC_${kind} "${SW_${kind}}")
  else()
    set(SW_PC_${kind} "\${prefix}/${SW_${kind}}")
  endif()
endforeach()
configure_file("${SW_PC_IN}" "${SW_PC_OUT}" @ONLY)
