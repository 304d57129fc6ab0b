"""`loyalty admin …`: the back-office operations, over gRPC to BackofficeService.

The admin token comes from LOYALTY_ADMIN_TOKEN or LOYALTY_ADMIN_TOKEN_FILE
(Settings.configured_admin_token), else from `<data dir>/admin_token` (which `loyalty up`
creates). Results print as readable lines (`--json`: the response message as
JSON); a failure prints one line `error: <codigo>: <detalle>` and exits with 1.
"""

from __future__ import annotations

from loyalty_grpc.runtime.cli.admin.parser import add_admin_commands
from loyalty_grpc.runtime.cli.admin.run import run_admin

__all__ = ["add_admin_commands", "run_admin"]
