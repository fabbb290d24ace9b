"""What the tests share: the OpenAI-compatible test server, real lmms-eval and capjudge runs, warm launches, the
headless browser, generated videos, hostile-input checks and the toy judge's files. Imported as `tests.support.<module>`."""
