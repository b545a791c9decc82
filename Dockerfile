# One image for web (ASGI), Celery worker, beat and the simulated fleet.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY controlplane ./controlplane
COPY routing_policies ./routing_policies
COPY telemetry ./telemetry
COPY lab ./lab
COPY edge_sdk ./edge_sdk
RUN pip install --no-cache-dir .

COPY . .
RUN python -c 'import pathlib, plotly; src = pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js"; dst = pathlib.Path("static/vendor/plotly.min.js"); dst.parent.mkdir(parents=True, exist_ok=True); dst.write_bytes(src.read_bytes())' \
 && SECRET_KEY=build-only python manage.py collectstatic --noinput -v0

EXPOSE 8000
CMD ["uvicorn", "controlplane.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", \
     "--lifespan", "off", "--ws", "websockets-sansio", "--ws-per-message-deflate", "false"]
