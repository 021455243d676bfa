"""dbmigrate: live MySQL/MariaDB migration and cutover toolkit."""

__version__ = "0.1.0"
