"""The back office's use cases (BackofficeService, `loyalty admin`): programs, API keys,
fans, promotions, delivering and releasing codes, the support desk's points and sales,
and loading a fixture.

Each use case takes a `UnitOfWork` (store/uow.py) whose transaction its caller owns and
never commits, and runs its statements through store/ functions on `uow.conn`, so several
use cases can run in one transaction::

    with UnitOfWork(engine) as uow:
        fan = fans.register_fan(uow, programa, fan_id, ...)
        promos.create_promo(uow, programa, nombre, ...)
        uow.commit()

`store.uow.run_in_uow(engine, use_case, ...)` runs one alone (one transaction per
BackofficeService RPC). The exception is `keys.authenticate`, on every POS call's path: one
autocommit round trip on the `Database` (the engine, store/db.py)."""
