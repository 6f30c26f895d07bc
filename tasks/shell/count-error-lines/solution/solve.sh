#!/bin/bash
awk '$2 == "ERROR"' app.log | wc -l >answer.txt
