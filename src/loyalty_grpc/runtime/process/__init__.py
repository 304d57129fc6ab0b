"""Process supervision: the gRPC worker processes sharing a port (`workers`, `worker`),
restarting what dies (`supervision`), telling a frozen worker (`liveness`), the processes
file `loyalty status` reads (`process_file`), signals (`signals`) and children that die
with their parent (`parent_death`)."""
