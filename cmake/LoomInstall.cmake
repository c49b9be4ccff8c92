# `cmake --install` gives users find_package(Loom) with the target Loom::loom.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS loom EXPORT LoomTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS loom_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY src/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "cli" EXCLUDE)
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)

configure_package_config_file(cmake/LoomConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
