"""The `vanilla-transformer` command's entry point (`[project.scripts]` in pyproject.toml).

A module of its own, beside the `vanilla_transformer` package, for one reason: importing the package registers the
model with transformers (`vanilla_transformer.registration.register`), which imports torch and transformers' model
code, seconds of CPU that `--help` and a usage error do not need. When this module is loaded before the package, the
package's `__init__` leaves registration to the command line, which registers just before a command runs
(`vanilla_transformer.cli.main`). Everything else about the command line is in `vanilla_transformer/cli/`.
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.cli.main import main as run_command_line

    run_command_line(argv)


if __name__ == "__main__":
    main()
