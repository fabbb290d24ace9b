"""capjudge.tasks: lmms-eval task folders (YAML + thin glue) and the captions_file model."""
