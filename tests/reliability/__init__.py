"""Reliability suite (issue 7): model-based, hostile-input and concurrent-history tests.

A package so that its helper modules (``model``, ``corpus``...) are imported as
``reliability.*`` and cannot collide with other test directories' modules.
"""
