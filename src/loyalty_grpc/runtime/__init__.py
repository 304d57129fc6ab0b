"""Running the service: the `loyalty` CLI, embedded PostgreSQL and Envoy supervision."""
