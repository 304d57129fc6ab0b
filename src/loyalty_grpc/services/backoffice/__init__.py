"""The back office's use cases (BackofficeService, `loyalty admin`): programs, API keys,
fans, promotions, delivering and releasing codes, the support desk's points and sales,
and loading a fixture."""
