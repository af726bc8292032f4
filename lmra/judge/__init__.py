"""The LMRA's questions: one module per question, sharing the option-probability machinery."""
