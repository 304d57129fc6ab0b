"""Use cases, one module per capability: plain values in, plain values out, a unit of work
for the database, domain errors (LoyaltyError) for failures. `pos/`: the POS API's
endpoints; `backoffice/`: BackofficeService; `rate_limit.py`: the per-key call limit of
the edge."""
