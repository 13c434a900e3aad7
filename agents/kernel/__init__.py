"""What every layer of agents shares: the conversation model and backend interface (llm), the
error hierarchy (exceptions) and lexical ranking (bm25)."""
