"""The database layer: connections and the DSN (with the embedded server as the no-server
default), the SQL files loaded by name, migrations, and the store, the only code that executes
SQL."""
