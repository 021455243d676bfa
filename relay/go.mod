module github.com/dbmigrate/relay

go 1.26.8
