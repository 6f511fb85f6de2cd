# Installation: header and libraries.
include(GNUInstallDirs)
install(FILES include/shoal.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS shoal shoal_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
