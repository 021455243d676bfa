"""dbmigrate: live MySQL/MariaDB migration and cutover toolkit."""

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it from here)


def version_line() -> str:
    return f"dbmigrate {__version__}"
