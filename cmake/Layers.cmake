# The layers of docs/architecture.md ("Rooms") and, for each, the layers its files may include
# (itself among them). Read by the layers' object libraries (src/CMakeLists.txt), whose include
# paths follow it, and by the build's check of every include (cmake/CheckLayers.cmake).
set(LOOM_LAYERS core data comm models parallel profile train)
set(allowed_core core)
set(allowed_data core data)
set(allowed_comm core comm)
set(allowed_models core models)
set(allowed_parallel core comm models parallel)
set(allowed_profile core profile)
set(allowed_train core data comm models parallel profile train)
set(allowed_cli core data comm models parallel profile train cli)
