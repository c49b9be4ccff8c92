// Token data for Python (data/tokenizer.h, data/token_windows.h): a `loom data tokenize` folder's
// tokenizer and training windows, for a script's own language-model loop. loom.data exports them.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer.h"

namespace loom::python {

void bind_tokens(py::module_& m) {
  py::class_<data::Tokenizer>(m, "Tokenizer",
                              "A SentencePiece tokenizer (a `loom data tokenize` folder's "
                              "tokenizer.model, or any SentencePiece .model).")
      .def(py::init([](const std::string& path) { return data::Tokenizer::load(path); }),
           py::arg("path"))
      .def("encode", &data::Tokenizer::encode, py::arg("text"), "Token ids of `text`.")
      .def("decode", &data::Tokenizer::decode, py::arg("ids"), "The text of token ids.")
      .def_property_readonly("vocab_size", &data::Tokenizer::vocab_size)
      .def_property_readonly("eos_id", &data::Tokenizer::eos_id)
      .def_property_readonly("fingerprint", [](const data::Tokenizer& t) {
        return data::fingerprint_hex(t.fingerprint());
      });

  py::class_<data::TokenWindows>(
      m, "TokenWindows",
      "Windows of seq_len + 1 tokens from a `loom data tokenize` folder's shards, at positions "
      "that are a pure function of (seed, epoch, index); each rank a disjoint share.")
      .def(py::init([](const std::string& dir, const std::string& split, int64_t seq_len,
                       uint64_t seed, int rank, int world) {
             return data::TokenWindows::open(dir, split, seq_len, seed, rank, world);
           }),
           py::arg("dir"), py::arg("split") = "train", py::arg("seq_len"), py::arg("seed") = 0,
           py::arg("rank") = 0, py::arg("world") = 1)
      .def("__len__", &data::TokenWindows::size, "This rank's windows an epoch.")
      .def("batch", &data::TokenWindows::batch, py::arg("epoch"), py::arg("step"), py::arg("batch"),
           py::call_guard<py::gil_scoped_release>(),
           "Windows [step x batch, (step + 1) x batch) of this rank's share of `epoch`, as an "
           "int64 tensor [batch, seq_len + 1]: inputs batch[:, :-1], targets batch[:, 1:].")
      .def_property_readonly("seq_len", &data::TokenWindows::seq_len)
      .def_property_readonly("tokens", &data::TokenWindows::tokens)
      .def_property_readonly("vocab_size", &data::TokenWindows::vocab_size);
}

}  // namespace loom::python
