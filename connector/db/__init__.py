"""Everything that talks to Postgres: server lifecycle and migrations (`database`), SQL text (`queries`), the rows
its reads return (`rows`), and the typed operations the pipeline uses (`store`)."""
