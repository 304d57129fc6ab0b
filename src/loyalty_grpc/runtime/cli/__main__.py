"""`python -m loyalty_grpc.runtime.cli`, the same as the `loyalty` command."""

import sys

from loyalty_grpc.runtime.cli.main import main

sys.exit(main())
