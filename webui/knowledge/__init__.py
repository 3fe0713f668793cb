"""The knowledge base: per project, collections of documents a workflow searches."""
