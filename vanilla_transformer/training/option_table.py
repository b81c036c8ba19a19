"""The train command's options as a table, so that `--help` and usage errors answer without torch or transformers.

The recipe parses its options with transformers' `HfArgumentParser` over three dataclasses, one of them
`Seq2SeqTrainingArguments`; importing that class imports transformers and torch, seconds of CPU. The parser itself
is plain argparse: `table_of` writes down each of its arguments (option strings, type, choices, nargs, default,
help) as JSON, with each preset's defaults, and `parser_from_table` builds an argparse parser from that table alone
that prints the same `--help` and makes the same usage errors (tests/test_option_table.py compares the two on the
installed transformers).

The table is made by the full parser (`training.arguments.option_table`) on the first use of the train command and
kept under the Hugging Face cache (`$HF_HOME/vanilla-transformer/`), in a file named after everything it was made
from: the Python version, the versions of transformers and accelerate, the source files of transformers that define
the Trainer's options and every module of this recipe (`table_key`). A table made from other sources has another
name, so it is never read; a table that cannot be read or written only means building the full parser again.

`check_command_line` answers `--help` and argparse's usage errors from the table; the run itself parses the command
line again with the full parser, so the options mean exactly what they mean to `HfArgumentParser`. An option whose
type is not a builtin (transformers' boolean words, a dict, a path) is taken as text here, and the full parser judges
its value.
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import sys
import tempfile

from huggingface_hub import constants as hub_constants

TABLE_FORMAT = 1
# transformers' files that define the Trainer's options and how HfArgumentParser turns them into arguments
TRANSFORMERS_SOURCES = ("training_args.py", "training_args_seq2seq.py", "trainer_utils.py", "debug_utils.py",
                        "hf_argparser.py")
VERSIONS_OF = ("transformers", "accelerate")  # accelerate's version decides some option types of TrainingArguments
# argparse's action classes (not public names of argparse) by the names add_argument takes
ACTIONS = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
           argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const",
           argparse._HelpAction: "help", argparse._AppendAction: "append"}
EXACT_TYPES = {"int": int, "float": float, "str": str}
CHOICE_TYPE = "make_choice_type_function.<locals>.<lambda>"  # HfArgumentParser's type of an option with choices

# The defaults a run settles from the machine it runs on (training.arguments.parse_arguments), as --help tells them
MACHINE_DEFAULTS = {
    "bf16": "what this machine trains fastest in, chosen and printed when the run starts",
    "fp16": "what this machine trains fastest in, chosen and printed when the run starts",
    "dataloader_pin_memory": "True where torch finds a CUDA GPU, else False",
    "use_cpu": "False, but True under torchrun on a machine without a CUDA GPU",
}


class Shown:
    """A default as --help shows it: its text, for a value that is not JSON (an enum, a tuple) or that the machine
    decides (`MACHINE_DEFAULTS`). argparse only prints it (`%(default)s`); it never converts it as it converts a
    string default."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def table_key() -> str | None:
    """The SHA-256 of what the table is made from (see the module's docstring), or None where transformers' sources
    cannot be read (no table then)."""
    digest = hashlib.sha256(f"format {TABLE_FORMAT} | python {sys.version_info[:3]}".encode())
    for name in VERSIONS_OF:
        try:
            digest.update(f" | {name} {importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f" | no {name}".encode())
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    transformers_folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    ours = sorted(pathlib.Path(__file__).parent.glob("*.py"))
    try:
        for path in [*(transformers_folder / name for name in TRANSFORMERS_SOURCES), *ours]:
            digest.update(f" | {path.name} ".encode() + path.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


def table_path(key: str) -> str:
    return os.path.join(hub_constants.HF_HOME, "vanilla-transformer", f"train-options-{key[:32]}.json")


def cached_table() -> dict | None:
    """The table made from the installed sources, or None where none was kept (or it cannot be read)."""
    key = table_key()
    if key is None:
        return None
    try:
        with open(table_path(key), encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError):
        return None
    return table if isinstance(table, dict) and table.get("key") == key else None


def save_table(table: dict) -> None:
    """Keep `table` for the next command (atomically: a reader finds the whole file or none); a cache that cannot be
    written only means building the full parser again."""
    path = table_path(table["key"])
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".train-options-", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                json.dump(table, f, indent=0)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass


def _json_value(value):
    """{"value": value} where JSON keeps it as it is (same type, same text), else {"text": str(value)}."""
    try:
        back = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        back = None
    if back == value and type(back) is type(value) and str(back) == str(value):
        return {"value": value}
    return {"text": str(value)}


def _type_name(action: argparse.Action) -> str | None:
    if action.type is None:
        return None
    name = getattr(action.type, "__qualname__", type(action.type).__qualname__)
    if name == CHOICE_TYPE:
        return "choice"
    return name if action.type in EXACT_TYPES.values() else f"text:{name}"


def table_of(parser: argparse.ArgumentParser, presets: dict[str, dict], key: str) -> dict | None:
    """The table of `parser`'s arguments (None where one cannot be written down: an action, a choice or a help
    formatter this module does not know), with `presets` (name -> {"defaults": the parser defaults it sets}) and the
    sources' `key`."""
    if getattr(argparse, parser.formatter_class.__name__, None) is not parser.formatter_class:
        return None
    actions = []
    # argparse keeps no public list of its arguments and their groups
    groups = {id(action): group.title for group in parser._action_groups for action in group._group_actions}
    for action in parser._actions:
        kind = ACTIONS.get(type(action))
        choices = None if action.choices is None else [_json_value(choice) for choice in action.choices]
        if kind is None or (choices and any("value" not in choice for choice in choices)):
            return None
        actions.append({
            "action": kind, "option_strings": list(action.option_strings), "dest": action.dest,
            "nargs": action.nargs, "const": _json_value(action.const), "default": _json_value(action.default),
            "type": _type_name(action), "choices": None if choices is None else [c["value"] for c in choices],
            "required": action.required, "help": action.help, "metavar": action.metavar,
            "group": groups.get(id(action)),
        })
    return {"key": key, "prog": parser.prog, "usage": parser.usage, "description": parser.description,
            "epilog": parser.epilog, "formatter": parser.formatter_class.__name__, "actions": actions,
            "presets": presets}


def _value(entry: dict):
    return entry["value"] if "value" in entry else Shown(entry["text"])


def _choice_type(choices: list):
    """HfArgumentParser's conversion of an option with choices: a choice's text becomes the choice."""
    by_text = {str(choice): choice for choice in choices}
    return lambda text: by_text.get(text, text)


def _text(text: str) -> str:
    return text


def parser_from_table(table: dict, defaults: dict | None = None) -> argparse.ArgumentParser:
    """An argparse parser with the arguments of `table`, and `defaults` (dest -> value) over the table's defaults."""
    formatter = getattr(argparse, table["formatter"])
    parser = argparse.ArgumentParser(prog=table["prog"], usage=table["usage"], description=table["description"],
                                     epilog=table["epilog"], formatter_class=formatter, add_help=False)
    groups = {group.title: group for group in parser._action_groups}
    for entry in table["actions"]:
        title = entry["group"]
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        keywords = {"action": entry["action"], "dest": entry["dest"], "help": entry["help"]}
        if entry["action"] in ("store", "append"):
            keywords.update(nargs=entry["nargs"], const=_value(entry["const"]), choices=entry["choices"],
                            metavar=entry["metavar"], required=entry["required"])
            type_name = entry["type"]
            if type_name == "choice":
                keywords["type"] = _choice_type(entry["choices"])
            elif type_name is not None:
                keywords["type"] = EXACT_TYPES.get(type_name, _text)
        if entry["action"] == "store_const":
            keywords["const"] = _value(entry["const"])
        if entry["action"] != "help":
            keywords["default"] = _value(entry["default"])
        if not entry["option_strings"]:
            keywords.pop("dest")
        groups[title].add_argument(*entry["option_strings"], **keywords)
    if defaults:
        parser.set_defaults(**defaults)
    return parser


def help_defaults(table: dict, preset: str) -> dict:
    """The defaults --help shows for `preset`: the preset's, and what the machine decides in words."""
    defaults = dict(table["presets"][preset]["defaults"])
    defaults["report_to"] = "tensorboard" if importlib.util.find_spec("tensorboard") else "none"
    defaults.update({name: Shown(text) for name, text in MACHINE_DEFAULTS.items()})
    return defaults


def chosen_preset(argv: list[str], default: str = "demo") -> str:
    """The --preset value of `argv` (the last one given), as argparse reads it: the preset parser of
    `parse_arguments`."""
    preset_parser = argparse.ArgumentParser(add_help=False)
    preset_parser.add_argument("--preset", default=default)
    return preset_parser.parse_known_args(argv)[0].preset


def unknown_preset(name: str, presets) -> str:
    return f"unknown --preset {name!r}; choose one of {', '.join(presets)}"


def check_command_line(argv: list[str], table: dict) -> None:
    """Answer `--help` (print it, exit 0) and the usage errors argparse finds (usage, one line, exit 2) from `table`;
    return quietly where the command line parses."""
    preset = chosen_preset(argv)
    if preset not in table["presets"]:
        parser_from_table(table).error(unknown_preset(preset, table["presets"]))
    parser_from_table(table, help_defaults(table, preset)).parse_args(argv)


__all__ = ["MACHINE_DEFAULTS", "Shown", "cached_table", "check_command_line", "chosen_preset", "help_defaults",
           "parser_from_table", "save_table", "table_key", "table_of", "unknown_preset"]
