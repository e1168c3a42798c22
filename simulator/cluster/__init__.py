"""Fleets: several replicas, each the single-replica engine loop, behind a router, in one SimPy
environment (DESIGN.md, "Where it grows: fleets")."""
