# One image for both the web (daphne) and worker (Celery) services of docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY . .
# Static files are collected at build time, with a throwaway key (no secret in the image).
RUN DJANGO_DEBUG=false DJANGO_SECRET_KEY=collectstatic-only-not-a-real-secret-key-0123456789abcdef \
    python manage.py collectstatic --noinput

RUN useradd --create-home lab && chown -R lab /app
USER lab
EXPOSE 8000
CMD ["daphne", "--no-server-name", "-b", "0.0.0.0", "-p", "8000", "lab_project.asgi:application"]
