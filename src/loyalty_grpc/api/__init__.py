"""The gRPC edge: thin servicers, interceptors (auth, errors), proto <-> domain conversion."""
