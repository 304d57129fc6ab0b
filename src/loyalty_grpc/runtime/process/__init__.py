"""Process supervision: the gRPC worker processes sharing a port (`workers`, `worker`),
restarting what dies (`supervision`), the processes file `loyalty status` reads
(`process_file`), signals (`signals`) and children that die with their parent
(`parent_death`)."""
