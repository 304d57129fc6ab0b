"""Pure rules of the business: no I/O, no SQLAlchemy, no grpc."""
