module github.com/dbmigrate/relay

go 1.22
