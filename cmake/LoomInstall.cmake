# `cmake --install` gives users find_package(Loom) with the target Loom::loom.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The public API: configuration, data sources and the loader, communicators, DataParallel and
# GradSync, the trainer's entry points, the profiler's outputs (and what those headers include,
# so the installed set is closed). They include nothing but LibTorch and the standard library,
# so the torch Loom was built against is all a user needs; the other headers are internal and not installed.
# tests/e2e/install_and_embed.sh checks that the set is closed and free of other libraries.
set(LOOM_PUBLIC_HEADERS
  loom/comm/communicator.h
  loom/comm/group_maker.h
  loom/comm/make_communicator.h
  loom/comm/rendezvous.h
  loom/comm/store_protocol.h
  loom/comm/store_server.h
  loom/comm/store_table.h
  loom/comm/work.h
  loom/comm/world_info.h
  loom/core/autocast_scope.h
  loom/core/blas_library.h
  loom/core/caching_allocator.h
  loom/core/config.h
  loom/core/cpu_capability.h
  loom/core/durable_file.h
  loom/core/error.h
  loom/core/ignored_target.h
  loom/core/log.h
  loom/core/rng.h
  loom/core/settings.h
  loom/core/step_phase.h
  loom/core/tensor_to_fetch.h
  loom/core/termination.h
  loom/core/topology.h
  loom/core/transform_config.h
  loom/data/batch_source.h
  loom/data/configured_loaders.h
  loom/data/dataset.h
  loom/data/epoch_order.h
  loom/data/feeder.h
  loom/data/idx.h
  loom/data/image_codec.h
  loom/data/image_folder.h
  loom/data/image_set.h
  loom/data/in_memory_dataset.h
  loom/data/loader.h
  loom/data/loader_state.h
  loom/data/batch_window.h
  loom/data/ordered_window.h
  loom/data/remote/remote_worker_stats.h
  loom/data/sample_error.h
  loom/data/synthetic.h
  loom/data/tar_shards.h
  loom/data/token_batch_source.h
  loom/data/token_shard.h
  loom/data/token_windows.h
  loom/data/tokenizer.h
  loom/data/transform_pipeline.h
  loom/data/transform_registry.h
  loom/data/transforms.h
  loom/models/block_chain_model.h
  loom/models/draw_key.h
  loom/models/loss.h
  loom/models/model.h
  loom/models/tensor_parallel.h
  loom/models/tensor_plan.h
  loom/parallel/bucket_exchange.h
  loom/parallel/bucket_plan.h
  loom/parallel/data_parallel.h
  loom/parallel/data_replicas.h
  loom/parallel/grad_sync.h
  loom/parallel/job_groups.h
  loom/parallel/layout_piece.h
  loom/parallel/layout_plan.h
  loom/parallel/layout_report.h
  loom/parallel/local_grad_sync.h
  loom/parallel/mesh.h
  loom/parallel/parallel_layout.h
  loom/parallel/ps/part_plan.h
  loom/parallel/ps/ps_bucket_exchange.h
  loom/parallel/ps/ps_exchange.h
  loom/parallel/ps/ps_protocol.h
  loom/parallel/ps/server_load.h
  loom/parallel/replicated_layout.h
  loom/parallel/sharded_model.h
  loom/parallel/tensor_ranks.h
  loom/parallel/step_executor.h
  loom/parallel/zero_partition.h
  loom/profile/advisor.h
  loom/profile/autotuner.h
  loom/profile/cost_plan.h
  loom/profile/cost_planner.h
  loom/profile/host_syncs.h
  loom/profile/report.h
  loom/profile/step_timer.h
  loom/profile/tfevents_writer.h
  loom/profile/trace_writer.h
  loom/train/async_checkpoint_writer.h
  loom/train/checkpoint.h
  loom/train/checkpoint_agreement.h
  loom/train/best_checkpoint.h
  loom/train/data_stream.h
  loom/train/job.h
  loom/train/loss_scaler.h
  loom/train/step_faults.h
  loom/train/optimizer.h
  loom/train/runtime_choice.h
  loom/train/script_pipeline.h
  loom/train/step_accounting.h
  loom/train/summary.h
  loom/train/trainer.h
  CACHE INTERNAL "The headers `cmake --install` installs, relative to src/")

install(TARGETS loom EXPORT LoomTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS loom_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CLI the `loom` executable loads (src/CMakeLists.txt), where it looks for it.
install(TARGETS loom_cli_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# SentencePiece's module goes beside libloom, where data/tokenizer.cpp looks for it.
install(TARGETS loom_sentencepiece LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET loom_nccl)
  install(TARGETS loom_nccl LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
foreach(header ${LOOM_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES src/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir})
endforeach()
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)

configure_package_config_file(cmake/LoomConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
  ${PROJECT_SOURCE_DIR}/cmake/LoomTorch.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
