// What a failed `loom` command leaves for programs: its error as one JSON object in the file
// LOOM_ERROR_FILE names (as torchrun's workers write TORCHELASTIC_ERROR_FILE), so that a launcher,
// a scheduler or a test reads the exit code, the kind and the error's fields (a configuration
// error's key, a data error's file and value) without parsing the message.
#pragma once

#include <exception>
#include <string>

namespace loom::cli {

// Writes the report of `error`, ending `command` with `exit_code`, when LOOM_ERROR_FILE is set
// (else TORCHELASTIC_ERROR_FILE, torchrun's); nothing otherwise. Never throws: a report that
// cannot be written is said on stderr.
//   {"command": "train", "exit_code": 2, "kind": "config", "message": "...", "rank": 0,
//    "fields": {"key": "optimizer.name", ...}, "timestamp": 1795000000}
void report_error(const std::string& command, int exit_code, const std::exception& error);

// This process's rank as the engine that started it names it (RANK from loom launch and
// torchrun, SLURM_PROCID, OMPI_COMM_WORLD_RANK); 0 when none does. Read without the checks of
// comm::world_from_environment: reporting an error must not fail on what it reports.
int rank_from_environment();

}  // namespace loom::cli
