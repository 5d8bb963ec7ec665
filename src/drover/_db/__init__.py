"""The database layer: the only package that imports psycopg or executes SQL.

Everything above it (the client, the services, the CLI) calls the functions
here and receives drover types and drover exceptions.
"""
