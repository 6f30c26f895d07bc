"""Tinker's REST API (placeholder until the training routes land)."""

from __future__ import annotations

from fastapi import APIRouter

from server.app import ServeConfig
from server.pool import SamplerPool


def build_router(config: ServeConfig, pool: SamplerPool) -> APIRouter:
    return APIRouter()
