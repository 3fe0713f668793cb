"""Two ask() rounds and one approve(), all on the same run."""


def plan_trip(ctx):
    ctx.progress(0, 3, "asking for the destination")
    where = ctx.ask(
        "Where to?",
        [
            {"name": "destination", "type": "string", "required": True, "description": "City"},
            {"name": "nights", "type": "number", "required": True, "default": 2},
            {"name": "start", "type": "string", "format": "date"},
        ],
        message="Tell us about the trip.",
    )
    if where is None:
        return {"booked": False, "reason": "declined at destination"}
    ctx.progress(1, 3, "asking for the room")
    room = ctx.ask(
        "Which room?",
        [
            {
                "name": "room",
                "type": "string",
                "required": True,
                "options": [
                    {"value": "single", "label": "Single room"},
                    {"value": "double", "label": "Double room"},
                ],
            },
            {"name": "extras", "type": "checkboxes", "options": ["breakfast", "parking", "late-checkout"]},
        ],
    )
    if room is None:
        return {"booked": False, "reason": "declined at room"}
    ctx.progress(2, 3, "asking for approval")
    total = 80 * where["nights"]
    approved = ctx.approve(
        f"book {where['nights']} nights in {where['destination']}",
        message=f"Total {total} EUR.",
        details={"room": room["room"], "extras": room.get("extras", [])},
    )
    ctx.progress(3, 3, "done")
    return {
        "traveller": ctx.params["traveller"],
        "destination": where["destination"],
        "nights": where["nights"],
        "room": room["room"],
        "extras": room.get("extras", []),
        "booked": approved,
    }


def collect_document(ctx):
    answer = ctx.ask("Upload the signed form", [{"name": "form", "type": "file", "required": True}])
    return {"received": answer is not None}
