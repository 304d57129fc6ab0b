"""Use cases, one module per capability: plain values in, plain values out, a unit of work
for the database, domain errors (LoyaltyError) for failures."""
