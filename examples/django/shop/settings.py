"""A minimal Django project whose view enqueues taskq tasks in its atomic() block.

The database is the one taskq uses ($TASKQ_DSN, a libpq DSN), with Django's psycopg 3 backend.
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("TASKQ_DSN", "dbname=app"))

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["orders"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", "app"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
