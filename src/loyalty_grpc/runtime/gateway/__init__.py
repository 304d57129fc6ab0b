"""Envoy, the HTTP/JSON gateway in front of the gRPC servers: its configuration
(`config`: render and validate gateway/envoy.yaml), how Envoy runs it (`xds`: split for
file-based xDS), changing it live (`reload`), the admin interface (`admin`), and the Envoy
process with `loyalty gateway run` (`envoy`)."""
