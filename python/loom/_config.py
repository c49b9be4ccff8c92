"""The `config` argument every loom function takes: a dict, YAML text, or a path to a file."""

import json
import os

from . import _loom


def load(config, overrides=()):
    """A validated `_loom.Config` from a dict, YAML text or a path, plus 'key=value' overrides.

    A dict has the layout of a `loom train` YAML file ({"data": {"batch_size": 64}, ...}).
    A string is a path when it names an existing file (or ends in .yaml / .yml), otherwise YAML
    text. None means the built-in defaults. Raises loom.ConfigError naming the key.
    """
    overrides = [str(o) for o in overrides]
    if config is None:
        return _loom.Config.from_files([], overrides)
    if isinstance(config, _loom.Config):
        if overrides:
            raise _loom.ConfigError("overrides: give them with the dict, text or path, "
                                    "not with an already loaded Config")
        return config
    if isinstance(config, dict):
        # JSON is YAML, so the C++ parser reads the dict with the same keys and checks.
        return _loom.Config.from_text(json.dumps(config), "config dict", overrides)
    if isinstance(config, os.PathLike):
        return _loom.Config.from_files([os.fspath(config)], overrides)
    if isinstance(config, str):
        if os.path.isfile(config) or config.endswith((".yaml", ".yml")):
            return _loom.Config.from_files([config], overrides)
        return _loom.Config.from_text(config, "config text", overrides)
    raise TypeError(f"config: expected a dict, YAML text or a path, got {type(config).__name__}")
