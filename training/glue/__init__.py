"""symbert-glue: fine-tuning and scoring on GLUE (and the tasks of the same shape) as the papers report it."""
