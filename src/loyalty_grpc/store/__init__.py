"""PostgreSQL through SQLAlchemy 2 Core + psycopg 3: tables, engine, unit of work, queries."""
