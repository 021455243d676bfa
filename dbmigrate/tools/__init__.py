"""External tools dbmigrate drives: sysbench, Percona Toolkit, backups."""
