"""The IntegrityError translation, now in store/integrity.py: still importable from here
for the back-office modules that catch the exception themselves until their SQL moves
to store/ (promos.py). Remove this module when nothing imports it."""

from __future__ import annotations

from loyalty_grpc.store.integrity import translate, violated_constraint

__all__ = ["translate", "violated_constraint"]
