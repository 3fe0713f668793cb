"""Registered projects: the service that keeps project folders, their published versions
and target resolution, over the project format (webui.workflows) and the store."""
